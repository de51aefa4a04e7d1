"""``python -m nsysaudit.schemas``: write the schema files from the documents' types (``make contract``)."""

from __future__ import annotations

from nsysaudit.schemas import write_schemas

for _path in write_schemas():
    print(_path)
