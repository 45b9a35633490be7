// The "_masked" kernel of backward_util.cu (the bias gradient through a ReLU, reading
// grad_y through its output), as a module of its own, as the other backward
// kernels' twins are: a backward through a ReLU compiles this module (with the
// shared kernels that read no gradient), not the plain one.
#include "backward_util.cu"
