# Fused floating types shared by every convsuite .pyx: one source, a float32
# and a float64 specialisation, chosen at call time from the array dtype.
ctypedef fused real:
    float
    double
