"""Report data: builds what a report says from analysis frames. Never prints."""
