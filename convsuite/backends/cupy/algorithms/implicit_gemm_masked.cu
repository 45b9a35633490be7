// The "_masked" kernels of implicit_gemm.cu: fused_gemm's input gradient (stride 1: the
// forward kernel on grad_y; other strides: the gather kernel) and its weight gradient,
// reading grad_y through the ReLU output (relu_output=), as a module of their own. The
// kernels are templates defined in implicit_gemm.cu (a MASK switch in its device
// bodies); naming only their "_masked" instantiations here (its CudaSource)
// leaves the plain module's compile as it was and compiles these on the first backward
// through a ReLU. common.cuh comes with the plain source.
#include "implicit_gemm.cu"
