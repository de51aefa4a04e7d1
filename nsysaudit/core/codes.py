"""Names of CUDA return codes: ``cudaError_t`` for runtime calls, ``CUresult`` for driver calls.

Values are from the CUDA 12/13 headers (``driver_types.h`` and ``cuda.h``). A code not listed here
has no name in the report (``None``): it is shown as the number the export holds, never guessed.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Literal, TypedDict

CUDA_ERROR_T: dict[int, str] = {
    0: "cudaSuccess",
    1: "cudaErrorInvalidValue",
    2: "cudaErrorMemoryAllocation",
    3: "cudaErrorInitializationError",
    4: "cudaErrorCudartUnloading",
    5: "cudaErrorProfilerDisabled",
    6: "cudaErrorProfilerNotInitialized",
    7: "cudaErrorProfilerAlreadyStarted",
    8: "cudaErrorProfilerAlreadyStopped",
    9: "cudaErrorInvalidConfiguration",
    12: "cudaErrorInvalidPitchValue",
    13: "cudaErrorInvalidSymbol",
    16: "cudaErrorInvalidHostPointer",
    17: "cudaErrorInvalidDevicePointer",
    18: "cudaErrorInvalidTexture",
    19: "cudaErrorInvalidTextureBinding",
    20: "cudaErrorInvalidChannelDescriptor",
    21: "cudaErrorInvalidMemcpyDirection",
    26: "cudaErrorInvalidFilterSetting",
    27: "cudaErrorInvalidNormSetting",
    34: "cudaErrorStubLibrary",
    35: "cudaErrorInsufficientDriver",
    36: "cudaErrorCallRequiresNewerDriver",
    37: "cudaErrorInvalidSurface",
    43: "cudaErrorDuplicateVariableName",
    44: "cudaErrorDuplicateTextureName",
    45: "cudaErrorDuplicateSurfaceName",
    46: "cudaErrorDevicesUnavailable",
    49: "cudaErrorIncompatibleDriverContext",
    52: "cudaErrorMissingConfiguration",
    65: "cudaErrorLaunchMaxDepthExceeded",
    66: "cudaErrorLaunchFileScopedTex",
    67: "cudaErrorLaunchFileScopedSurf",
    68: "cudaErrorSyncDepthExceeded",
    69: "cudaErrorLaunchPendingCountExceeded",
    98: "cudaErrorInvalidDeviceFunction",
    100: "cudaErrorNoDevice",
    101: "cudaErrorInvalidDevice",
    102: "cudaErrorDeviceNotLicensed",
    103: "cudaErrorSoftwareValidityNotEstablished",
    127: "cudaErrorStartupFailure",
    200: "cudaErrorInvalidKernelImage",
    201: "cudaErrorDeviceUninitialized",
    205: "cudaErrorMapBufferObjectFailed",
    206: "cudaErrorUnmapBufferObjectFailed",
    207: "cudaErrorArrayIsMapped",
    208: "cudaErrorAlreadyMapped",
    209: "cudaErrorNoKernelImageForDevice",
    210: "cudaErrorAlreadyAcquired",
    211: "cudaErrorNotMapped",
    212: "cudaErrorNotMappedAsArray",
    213: "cudaErrorNotMappedAsPointer",
    214: "cudaErrorECCUncorrectable",
    215: "cudaErrorUnsupportedLimit",
    216: "cudaErrorDeviceAlreadyInUse",
    217: "cudaErrorPeerAccessUnsupported",
    218: "cudaErrorInvalidPtx",
    219: "cudaErrorInvalidGraphicsContext",
    220: "cudaErrorNvlinkUncorrectable",
    221: "cudaErrorJitCompilerNotFound",
    222: "cudaErrorUnsupportedPtxVersion",
    223: "cudaErrorJitCompilationDisabled",
    224: "cudaErrorUnsupportedExecAffinity",
    225: "cudaErrorUnsupportedDevSideSync",
    300: "cudaErrorInvalidSource",
    301: "cudaErrorFileNotFound",
    302: "cudaErrorSharedObjectSymbolNotFound",
    303: "cudaErrorSharedObjectInitFailed",
    304: "cudaErrorOperatingSystem",
    400: "cudaErrorInvalidResourceHandle",
    401: "cudaErrorIllegalState",
    402: "cudaErrorLossyQuery",
    500: "cudaErrorSymbolNotFound",
    600: "cudaErrorNotReady",
    700: "cudaErrorIllegalAddress",
    701: "cudaErrorLaunchOutOfResources",
    702: "cudaErrorLaunchTimeout",
    703: "cudaErrorLaunchIncompatibleTexturing",
    704: "cudaErrorPeerAccessAlreadyEnabled",
    705: "cudaErrorPeerAccessNotEnabled",
    708: "cudaErrorSetOnActiveProcess",
    709: "cudaErrorContextIsDestroyed",
    710: "cudaErrorAssert",
    711: "cudaErrorTooManyPeers",
    712: "cudaErrorHostMemoryAlreadyRegistered",
    713: "cudaErrorHostMemoryNotRegistered",
    714: "cudaErrorHardwareStackError",
    715: "cudaErrorIllegalInstruction",
    716: "cudaErrorMisalignedAddress",
    717: "cudaErrorInvalidAddressSpace",
    718: "cudaErrorInvalidPc",
    719: "cudaErrorLaunchFailure",
    720: "cudaErrorCooperativeLaunchTooLarge",
    800: "cudaErrorNotPermitted",
    801: "cudaErrorNotSupported",
    802: "cudaErrorSystemNotReady",
    803: "cudaErrorSystemDriverMismatch",
    804: "cudaErrorCompatNotSupportedOnDevice",
    805: "cudaErrorMpsConnectionFailed",
    806: "cudaErrorMpsRpcFailure",
    807: "cudaErrorMpsServerNotReady",
    808: "cudaErrorMpsMaxClientsReached",
    809: "cudaErrorMpsMaxConnectionsReached",
    810: "cudaErrorMpsClientTerminated",
    811: "cudaErrorCdpNotSupported",
    812: "cudaErrorCdpVersionMismatch",
    900: "cudaErrorStreamCaptureUnsupported",
    901: "cudaErrorStreamCaptureInvalidated",
    902: "cudaErrorStreamCaptureMerge",
    903: "cudaErrorStreamCaptureUnmatched",
    904: "cudaErrorStreamCaptureUnjoined",
    905: "cudaErrorStreamCaptureIsolation",
    906: "cudaErrorStreamCaptureImplicit",
    907: "cudaErrorCapturedEvent",
    908: "cudaErrorStreamCaptureWrongThread",
    909: "cudaErrorTimeout",
    910: "cudaErrorGraphExecUpdateFailure",
    911: "cudaErrorExternalDevice",
    912: "cudaErrorInvalidClusterSize",
    913: "cudaErrorFunctionNotLoaded",
    914: "cudaErrorInvalidResourceType",
    915: "cudaErrorInvalidResourceConfiguration",
    999: "cudaErrorUnknown",
    10000: "cudaErrorApiFailureBase",
}

CU_RESULT: dict[int, str] = {
    0: "CUDA_SUCCESS",
    1: "CUDA_ERROR_INVALID_VALUE",
    2: "CUDA_ERROR_OUT_OF_MEMORY",
    3: "CUDA_ERROR_NOT_INITIALIZED",
    4: "CUDA_ERROR_DEINITIALIZED",
    5: "CUDA_ERROR_PROFILER_DISABLED",
    6: "CUDA_ERROR_PROFILER_NOT_INITIALIZED",
    7: "CUDA_ERROR_PROFILER_ALREADY_STARTED",
    8: "CUDA_ERROR_PROFILER_ALREADY_STOPPED",
    34: "CUDA_ERROR_STUB_LIBRARY",
    46: "CUDA_ERROR_DEVICE_UNAVAILABLE",
    100: "CUDA_ERROR_NO_DEVICE",
    101: "CUDA_ERROR_INVALID_DEVICE",
    102: "CUDA_ERROR_DEVICE_NOT_LICENSED",
    200: "CUDA_ERROR_INVALID_IMAGE",
    201: "CUDA_ERROR_INVALID_CONTEXT",
    202: "CUDA_ERROR_CONTEXT_ALREADY_CURRENT",
    205: "CUDA_ERROR_MAP_FAILED",
    206: "CUDA_ERROR_UNMAP_FAILED",
    207: "CUDA_ERROR_ARRAY_IS_MAPPED",
    208: "CUDA_ERROR_ALREADY_MAPPED",
    209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
    210: "CUDA_ERROR_ALREADY_ACQUIRED",
    211: "CUDA_ERROR_NOT_MAPPED",
    212: "CUDA_ERROR_NOT_MAPPED_AS_ARRAY",
    213: "CUDA_ERROR_NOT_MAPPED_AS_POINTER",
    214: "CUDA_ERROR_ECC_UNCORRECTABLE",
    215: "CUDA_ERROR_UNSUPPORTED_LIMIT",
    216: "CUDA_ERROR_CONTEXT_ALREADY_IN_USE",
    217: "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
    218: "CUDA_ERROR_INVALID_PTX",
    219: "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT",
    220: "CUDA_ERROR_NVLINK_UNCORRECTABLE",
    221: "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
    222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
    223: "CUDA_ERROR_JIT_COMPILATION_DISABLED",
    224: "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY",
    225: "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC",
    300: "CUDA_ERROR_INVALID_SOURCE",
    301: "CUDA_ERROR_FILE_NOT_FOUND",
    302: "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND",
    303: "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED",
    304: "CUDA_ERROR_OPERATING_SYSTEM",
    400: "CUDA_ERROR_INVALID_HANDLE",
    401: "CUDA_ERROR_ILLEGAL_STATE",
    402: "CUDA_ERROR_LOSSY_QUERY",
    500: "CUDA_ERROR_NOT_FOUND",
    600: "CUDA_ERROR_NOT_READY",
    700: "CUDA_ERROR_ILLEGAL_ADDRESS",
    701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
    702: "CUDA_ERROR_LAUNCH_TIMEOUT",
    703: "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING",
    704: "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
    705: "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
    708: "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE",
    709: "CUDA_ERROR_CONTEXT_IS_DESTROYED",
    710: "CUDA_ERROR_ASSERT",
    711: "CUDA_ERROR_TOO_MANY_PEERS",
    712: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
    713: "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
    714: "CUDA_ERROR_HARDWARE_STACK_ERROR",
    715: "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    716: "CUDA_ERROR_MISALIGNED_ADDRESS",
    717: "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    718: "CUDA_ERROR_INVALID_PC",
    719: "CUDA_ERROR_LAUNCH_FAILED",
    720: "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
    800: "CUDA_ERROR_NOT_PERMITTED",
    801: "CUDA_ERROR_NOT_SUPPORTED",
    802: "CUDA_ERROR_SYSTEM_NOT_READY",
    803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
    804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
    805: "CUDA_ERROR_MPS_CONNECTION_FAILED",
    806: "CUDA_ERROR_MPS_RPC_FAILURE",
    807: "CUDA_ERROR_MPS_SERVER_NOT_READY",
    808: "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED",
    809: "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED",
    810: "CUDA_ERROR_MPS_CLIENT_TERMINATED",
    811: "CUDA_ERROR_CDP_NOT_SUPPORTED",
    812: "CUDA_ERROR_CDP_VERSION_MISMATCH",
    900: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
    901: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
    902: "CUDA_ERROR_STREAM_CAPTURE_MERGE",
    903: "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
    904: "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
    905: "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
    906: "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
    907: "CUDA_ERROR_CAPTURED_EVENT",
    908: "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
    909: "CUDA_ERROR_TIMEOUT",
    910: "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
    911: "CUDA_ERROR_EXTERNAL_DEVICE",
    912: "CUDA_ERROR_INVALID_CLUSTER_SIZE",
    913: "CUDA_ERROR_FUNCTION_NOT_LOADED",
    914: "CUDA_ERROR_INVALID_RESOURCE_TYPE",
    915: "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION",
    999: "CUDA_ERROR_UNKNOWN",
}

_VERSION_SUFFIX = re.compile(r"_v[0-9]+\Z")

# Allocation entry points of the CUDA runtime and driver APIs. A failed call to one of these has
# no CUDA_GPU_MEMORY_USAGE_EVENTS row, so its requested size is unknown to the export.
_ALLOC_PREFIXES = (
    "cudaMalloc",  # cudaMalloc, cudaMallocAsync, cudaMallocManaged, cudaMallocPitch, cudaMalloc3D...
    "cudaHostAlloc",
    "cuMemAlloc",  # cuMemAlloc, cuMemAllocAsync, cuMemAllocManaged, cuMemAllocPitch, ...FromPoolAsync
    "cuMemHostAlloc",
    "cuMemCreate",
    "cuArrayCreate",
    "cuArray3DCreate",
    "cuMipmappedArrayCreate",
)


@lru_cache(maxsize=4096)
def display_name(api: str) -> str:
    """The API name without nsys's version suffix: ``cudaMalloc_v3020`` -> ``cudaMalloc``."""
    return _VERSION_SUFFIX.sub("", api)


# Entry points that give device memory back, each of which nsys records as a deallocation event of its
# own correlation id when it freed something: cudaFree/cuMemFree (and their Async forms, into a
# pool), array destruction, and cuMemUnmap (virtual memory: mapped memory is live until unmapped).
# Host memory (cudaFreeHost, cuMemFreeHost) is not device memory. cuMemRelease is not among them: it
# releases a physical allocation's handle, and the memory stays mapped until cuMemUnmap (the real
# expandable-segments capture: 7,788 cuMemRelease, none with a memory event).
_DEVICE_FREE_PREFIXES = ("cudaFree", "cuMemFree", "cuArrayDestroy", "cuMipmappedArrayDestroy", "cuMemUnmap")
_HOST_FREE_PREFIXES = ("cudaFreeHost", "cuMemFreeHost")


@lru_cache(maxsize=4096)
def is_device_free_api(api: str) -> bool:
    """Whether ``api`` (raw or display name) gives device memory back (cudaFree*, cuMemFree*, cuMemUnmap, ...)."""
    name = display_name(api)
    return name.startswith(_DEVICE_FREE_PREFIXES) and not name.startswith(_HOST_FREE_PREFIXES)


# CUDA's virtual memory management calls (the driver API that PyTorch's expandable segments use), by
# what each does to memory: ``map``/``unmap`` make physical memory accessible at an address or take it
# away (nsys writes the allocation event at cuMemSetAccess, the deallocation at cuMemUnmap),
# ``create``/``release`` make or drop a physical allocation's handle, ``reserve``/``address_free``
# reserve or free a range of virtual addresses, which is not memory.
VMM_ROLES = {
    "cuMemMap": "map",
    "cuMemSetAccess": "map",
    "cuMemMapArrayAsync": "map",
    "cuMemUnmap": "unmap",
    "cuMemCreate": "create",
    "cuMemRelease": "release",
    "cuMemAddressReserve": "reserve",
    "cuMemAddressFree": "address_free",
}


@lru_cache(maxsize=4096)
def vmm_role(api: str | None) -> str | None:
    """What a virtual memory management call does (:data:`VMM_ROLES`), or None for any other call."""
    return None if api is None else VMM_ROLES.get(display_name(api))


# Calls that allocate from, or free into, a CUDA memory pool (stream-ordered allocation): their memory
# events move memory within the pool; the pool's own size is what the device holds.
_POOL_PREFIXES = ("cudaMallocAsync", "cudaMallocFromPoolAsync", "cudaFreeAsync", "cuMemAllocAsync",
                  "cuMemAllocFromPoolAsync", "cuMemFreeAsync")


@lru_cache(maxsize=4096)
def is_pool_api(api: str | None) -> bool:
    """Whether ``api`` allocates from or frees into a CUDA memory pool (cudaMallocAsync, cudaFreeAsync, ...)."""
    return api is not None and display_name(api).startswith(_POOL_PREFIXES)


@lru_cache(maxsize=4096)
def is_allocation_api(api: str) -> bool:
    """Whether ``api`` (raw or display name) is a CUDA device/host memory allocation call."""
    return display_name(api).startswith(_ALLOC_PREFIXES)


# Calls that only allocate on the way to their own job: a CUDA_ERROR_OUT_OF_MEMORY from mapping a
# physical allocation is an allocation failure (NCCL's ncclCuMemAlloc: cuMemCreate, cuMemMap, cuMemSetAccess).
_ALLOCATING_ON_OOM = frozenset({"cuMemMap"})


@lru_cache(maxsize=65536)
def is_allocation_failure(api: str, code: int | None) -> bool:
    """Whether ``api`` returning ``code`` is a failed allocation: an allocation call (:func:`is_allocation_api`)
    that failed, or ``cuMemMap`` returning CUDA_ERROR_OUT_OF_MEMORY.

    >>> [is_allocation_failure(api, code) for api, code in (("cuMemCreate", 2), ("cuMemMap", 2), ("cuMemMap", 1))]
    [True, True, False]
    """
    if code is None or code == 0:
        return False
    return is_allocation_api(api) or (display_name(api) in _ALLOCATING_ON_OOM and is_out_of_memory(api, code))


@lru_cache(maxsize=65536)
def return_name(api: str, code: int) -> str | None:
    """The symbolic name of ``code`` as returned by ``api``; None when the code is not known.

    Runtime calls (``cuda*``) return ``cudaError_t``; driver calls (``cu*``) return ``CUresult``.
    """
    if api.startswith("cuda"):
        return CUDA_ERROR_T.get(code)
    if api.startswith("cu"):
        return CU_RESULT.get(code)
    return None


# --- what a non-zero return means for the call that returned it ------------------------------------

ReturnClass = Literal["failure", "reports_earlier_error", "not_ready_poll"]

# Calls whose job is to report an error raised by an EARLIER call: their non-zero return is not a
# failure of their own (cudaGetLastError returns, and clears, the last error of the thread).
_ERROR_REPORTING = frozenset({"cudaGetLastError", "cudaPeekAtLastError"})
# Query calls poll for completion: 600 (cudaErrorNotReady / CUDA_ERROR_NOT_READY) means "not yet".
_QUERY = re.compile(r"\Acu(da)?(Stream|Event)Query(_ptsz)?\Z")
NOT_READY = 600
# Codes that mean "out of memory": cudaErrorMemoryAllocation (runtime), CUDA_ERROR_OUT_OF_MEMORY (driver).
_OUT_OF_MEMORY = {"runtime": frozenset({2}), "driver": frozenset({2})}

_CAPTURE_BEGIN = re.compile(r"\Acu(da)?StreamBeginCapture(ToGraph)?(_v2)?(_ptsz)?\Z")
_CAPTURE_END = re.compile(r"\Acu(da)?StreamEndCapture(_ptsz)?\Z")
_EVENT_RECORD = re.compile(r"\Acu(da)?EventRecord(WithFlags)?(_ptsz)?\Z")
_STREAM_WAIT = re.compile(r"\Acu(da)?StreamWaitEvent(_ptsz)?\Z")


@lru_cache(maxsize=65536)
def return_class(api: str | None, code: int) -> ReturnClass:
    """What a non-zero ``code`` returned by ``api`` says about that call.

    >>> return_class("cudaGetLastError", 2)
    'reports_earlier_error'
    >>> return_class("cudaStreamQuery_v3020", 600)
    'not_ready_poll'
    >>> return_class("cudaMalloc_v3020", 2)
    'failure'
    """
    if api is None:
        return "failure"
    name = display_name(api)
    if name in _ERROR_REPORTING:
        return "reports_earlier_error"
    if code == NOT_READY and _QUERY.match(name):
        return "not_ready_poll"
    return "failure"


@lru_cache(maxsize=65536)
def is_out_of_memory(api: str | None, code: int | None) -> bool:
    """Whether ``code`` returned by ``api`` means out of (device or host) memory."""
    if api is None or code is None:
        return False
    family = "runtime" if api.startswith("cuda") else "driver" if api.startswith("cu") else None
    return family is not None and code in _OUT_OF_MEMORY[family]


def is_capture_begin(api: str) -> bool:
    """``cuStreamBeginCapture*`` / ``cudaStreamBeginCapture*``: a stream capture region opens."""
    return bool(_CAPTURE_BEGIN.match(display_name(api)))


def is_capture_end(api: str) -> bool:
    """``cuStreamEndCapture`` / ``cudaStreamEndCapture``: the capture region closes."""
    return bool(_CAPTURE_END.match(display_name(api)))


def is_event_record(api: str) -> bool:
    """``cuEventRecord*`` / ``cudaEventRecord*``."""
    return bool(_EVENT_RECORD.match(display_name(api)))


def is_stream_wait(api: str) -> bool:
    """``cuStreamWaitEvent*`` / ``cudaStreamWaitEvent*``: a stream waits on an event."""
    return bool(_STREAM_WAIT.match(display_name(api)))


class Names(TypedDict):
    display_api: str | None
    return_name: str | None


def names(api: str | None, code: int | None) -> Names:
    """``display_api`` and ``return_name`` of a call, as every report entry carries them; None where unknown.

    >>> names("cudaMalloc_v3020", 2)
    {'display_api': 'cudaMalloc', 'return_name': 'cudaErrorMemoryAllocation'}
    >>> names(None, 2)
    {'display_api': None, 'return_name': None}
    """
    return {
        "display_api": display_name(api) if api is not None else None,
        "return_name": return_name(api, code) if api is not None and code is not None else None,
    }
