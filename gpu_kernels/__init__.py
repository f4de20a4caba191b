"""CUDA kernels with their NumPy references beside them (CuPy imported lazily)."""
