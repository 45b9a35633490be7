// The "_masked" kernels of depthwise.cu: the depthwise input and weight gradients,
// reading grad_y through the ReLU output (relu_output=), as a module of their own. The
// kernels are templates defined in depthwise.cu (a MASK switch in its device bodies);
// naming only their "_masked" instantiations here (its CudaSource) leaves the
// plain module's compile as it was and compiles these on the first backward through a
// ReLU. common.cuh comes with the plain source.
#include "depthwise.cu"
