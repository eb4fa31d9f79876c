// tvmgen-clbuild: builds OpenCL programs into tvmgen's kernel cache, in a process of its own. Started by
// libtvmgen_opencl where the driver builds one program at a time per process (NVIDIA), so that a cold start's
// programs build side by side (see src/opencl/build_helpers.h, TVMGEN_OPENCL_BUILD_PROCESSES).
//   tvmgen-clbuild --cache-dir DIR --device N --options OPTIONS SOURCE.cl...
extern "C" int TVMGenOpenCLBuildMain(int argc, char** argv);

int main(int argc, char** argv) { return TVMGenOpenCLBuildMain(argc, argv); }
