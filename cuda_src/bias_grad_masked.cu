// The "_masked" kernel of bias_grad.cu (the bias gradient through a ReLU, reading
// grad_y through its output), as a module of its own, as the other backward
// kernels' twins are: a backward through a ReLU compiles these, not the plain module.
#include "bias_grad.cu"
