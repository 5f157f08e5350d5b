/* A stand-in for the CUDA runtime's device *queries*, for machines without a GPU.
 *
 * Loaded with LD_PRELOAD only into bench/fusion_identity.py's child processes, and only where no real
 * CUDA device answers. It describes ONE sm_90 device (H100-like limits) so that nvFuser's module init
 * and thunder's executor checks pass and thunder builds each region's nvFuser FusionDefinition (host IR).
 * Nothing here allocates, compiles or launches: every other runtime entry point is the real libcudart's,
 * which fails for lack of a driver. Built by bench/fusion_identity.py with gcc against the headers of
 * the nvidia-cuda-runtime wheel.
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <string.h>

#define STANDIN_DRIVER_VERSION 12080 /* a CUDA 12.8 driver: what the cu128 wheels need */
#define STANDIN_RUNTIME_VERSION CUDART_VERSION

static void fill_properties(struct cudaDeviceProp *p) {
  memset(p, 0, sizeof *p);
  strncpy(p->name, "thunder-overlay CUDA stand-in (sm_90, queries only)", sizeof p->name - 1);
  p->totalGlobalMem = (size_t)80 << 30;
  p->sharedMemPerBlock = 48 << 10;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->memPitch = (size_t)2147483647;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->clockRate = 1980000;
  p->totalConstMem = 65536;
  p->major = 9;
  p->minor = 0;
  p->textureAlignment = 512;
  p->texturePitchAlignment = 32;
  p->deviceOverlap = 1;
  p->multiProcessorCount = 132;
  p->canMapHostMemory = 1;
  p->concurrentKernels = 1;
  p->asyncEngineCount = 3;
  p->unifiedAddressing = 1;
  p->memoryClockRate = 2619000;
  p->memoryBusWidth = 5120;
  p->l2CacheSize = 50 << 20;
  p->persistingL2CacheMaxSize = 32 << 20;
  p->maxThreadsPerMultiProcessor = 2048;
  p->streamPrioritiesSupported = 1;
  p->globalL1CacheSupported = 1;
  p->localL1CacheSupported = 1;
  p->sharedMemPerMultiprocessor = 228 << 10;
  p->regsPerMultiprocessor = 65536;
  p->managedMemory = 1;
  p->cooperativeLaunch = 1;
  p->sharedMemPerBlockOptin = 227 << 10;
  p->maxBlocksPerMultiProcessor = 32;
  p->accessPolicyMaxWindowSize = 128 << 20;
  p->reservedSharedMemPerBlock = 1 << 10;
  p->memoryPoolsSupported = 1;
  p->clusterLaunch = 1;
}

cudaError_t cudaGetDeviceCount(int *count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties_v2(struct cudaDeviceProp *prop, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  fill_properties(prop);
  return cudaSuccess;
}

/* the pre-12.0 name, for callers built against older headers (the 12.x header maps it to _v2) */
#undef cudaGetDeviceProperties
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
  return cudaGetDeviceProperties_v2(prop, device);
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  struct cudaDeviceProp p;
  fill_properties(&p);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *value = p.maxThreadsDim[0]; break;
    case cudaDevAttrMaxBlockDimY: *value = p.maxThreadsDim[1]; break;
    case cudaDevAttrMaxBlockDimZ: *value = p.maxThreadsDim[2]; break;
    case cudaDevAttrMaxGridDimX: *value = p.maxGridSize[0]; break;
    case cudaDevAttrMaxGridDimY: *value = p.maxGridSize[1]; break;
    case cudaDevAttrMaxGridDimZ: *value = p.maxGridSize[2]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = (int)p.sharedMemPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)p.sharedMemPerBlockOptin; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = (int)p.sharedMemPerMultiprocessor; break;
    case cudaDevAttrReservedSharedMemoryPerBlock: *value = (int)p.reservedSharedMemPerBlock; break;
    case cudaDevAttrTotalConstantMemory: *value = (int)p.totalConstMem; break;
    case cudaDevAttrWarpSize: *value = p.warpSize; break;
    case cudaDevAttrMaxRegistersPerBlock: *value = p.regsPerBlock; break;
    case cudaDevAttrMaxRegistersPerMultiprocessor: *value = p.regsPerMultiprocessor; break;
    case cudaDevAttrClockRate: *value = p.clockRate; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = p.maxThreadsPerMultiProcessor; break;
    case cudaDevAttrMaxBlocksPerMultiprocessor: *value = p.maxBlocksPerMultiProcessor; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrL2CacheSize: *value = p.l2CacheSize; break;
    case cudaDevAttrMemoryClockRate: *value = p.memoryClockRate; break;
    case cudaDevAttrGlobalMemoryBusWidth: *value = p.memoryBusWidth; break;
    case cudaDevAttrConcurrentKernels: *value = p.concurrentKernels; break;
    case cudaDevAttrUnifiedAddressing: *value = p.unifiedAddressing; break;
    case cudaDevAttrCooperativeLaunch: *value = p.cooperativeLaunch; break;
    case cudaDevAttrClusterLaunch: *value = p.clusterLaunch; break;
    default: *value = 0; break; /* a feature this stand-in does not claim */
  }
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *version) {
  *version = STANDIN_DRIVER_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *version) {
  *version = STANDIN_RUNTIME_VERSION;
  return cudaSuccess;
}
