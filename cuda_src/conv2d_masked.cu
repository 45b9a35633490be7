// The "_masked" kernels of conv2d.cu (register_tiled read through the ReLU mask: the stride-1 input gradient of fused_gemm and igemm_big for <= 24 channels), reading grad_y through
// the ReLU output (relu_output=), as a module of their own. The kernels are
// templates defined in conv2d.cu; naming only their "_masked" instantiations
// here (_cuda_sources.KERNELS) leaves the plain module's compile as it was and
// compiles these on the first backward through a ReLU.
#include "common.cuh"
#include "conv2d.cu"
