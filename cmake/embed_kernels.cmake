# Writes the kernel files KERNEL_FILES (comma-separated paths, in program order: CMakeLists.txt) into one
# C++ source as raw string literals, keyed by file name.
string(REPLACE "," ";" kernel_files "${KERNEL_FILES}")
set(body "// Generated from kernels/*.cl by cmake/embed_kernels.cmake. Do not edit.\n")
string(APPEND body "#include \"llamacl/embedded_kernels.hpp\"\n\nnamespace llamacl {\n\n")
string(APPEND body "const std::vector<EmbeddedKernel>& embedded_kernels() {\n  static const std::vector<EmbeddedKernel> kernels = {\n")
foreach(path IN LISTS kernel_files)
  get_filename_component(name ${path} NAME)
  file(READ ${path} source)
  string(APPEND body "    {\"${name}\", R\"LLAMACL_CL(${source})LLAMACL_CL\"},\n")
endforeach()
string(APPEND body "  };\n  return kernels;\n}\n\n}  // namespace llamacl\n")
file(WRITE ${OUTPUT}.tmp "${body}")
file(COPY_FILE ${OUTPUT}.tmp ${OUTPUT} ONLY_IF_DIFFERENT)
