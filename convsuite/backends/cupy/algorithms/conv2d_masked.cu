// The "_masked" kernels of conv2d.cu: register_tiled reading its input through the
// mask: the stride-1 input gradient of fused_gemm and igemm_big for at most 24 channels
// per group, reading grad_y through the ReLU output (relu_output=), as a module of
// their own. The kernels are templates defined in conv2d.cu (a MASK switch in its
// device bodies); naming only their "_masked" instantiations here
// (its CudaSource) leaves the plain module's compile as it was and compiles
// these on the first backward through a ReLU. common.cuh comes with the plain source.
#include "conv2d.cu"
