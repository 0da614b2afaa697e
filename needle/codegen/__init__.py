"""Code generators: kernel IR (kernel_ir) -> LLVM IR (llvm, with llvm_types,
llvm_values, llvm_vector and the vector math library vecmath) for the CPU, or
CUDA C (cuda).  They render text and know nothing of ops, graphs or autograd."""
