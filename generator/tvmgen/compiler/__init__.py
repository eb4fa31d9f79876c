"""Compiler: a model to an artifact, by target.

- ``pipeline`` (the one seam every command calls), ``build`` (TVM's build and the artifact), ``kernels``
  (the kernel table written beside it), ``recurrent`` (LSTM/GRU kernels for each target), ``precision``
  (fp16), ``rewrites`` and ``conv_transpose`` (graph forms every target needs), ``gemm`` (bench --gemm);
- ``targets/``: the platform and device tables (``platforms``), the files each toolchain writes
  (``export``), the tuning database (``database``);
- ``cpu/``: the CPU pipeline and tvmgen's default schedules with their rules and rewrites;
- ``gpu/``: the OpenCL pipeline, Adreno textures, OpenCL loops, short kernel names;
- ``vulkan/``: tvmgen's GLSL code generator;
- ``int8/``: 8-bit dot products, quantised (QDQ) layers, requantisation;
- ``nnapi/``: NNAPI partitioning, placement, costs and code generation.
"""
