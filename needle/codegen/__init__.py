"""Code generators: kernel IR (kernel_ir) -> LLVM IR for the CPU (llvm, with
llvm_statements, llvm_exprs, llvm_types, llvm_values, llvm_vector and the vector math
library vecmath), or CUDA C (cuda).  They render text and know nothing of ops, graphs
or autograd."""
