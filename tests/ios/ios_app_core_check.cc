// Host driver for the iOS app's C++ core (templates/ios_rpc/TvmgenApp/Bridge/app_core.cc), linked with
// a host model built in system-lib mode, as the app links its model. test_ios.py builds and runs it:
//   ios_app_core_check MODEL_DIR PORT WORK_DIR
// prints the model run's JSON, then "serving" once the standalone server runs; a line on stdin stops it.
#include <cstdio>
#include <iostream>
#include <string>

#include "app_core.h"
#include "tvmgen/runtime.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: ios_app_core_check MODEL_DIR PORT WORK_DIR\n");
    return 2;
  }
  if (!tvmgen::HasLinkedModel()) {
    std::fprintf(stderr, "no model linked in\n");
    return 3;
  }
  std::printf("%s\n", tvmgen_app::RunLinkedModel(argv[1], 1, 3).c_str());
  tvmgen_app::ServerSettings bad;
  bad.mode = "bluetooth";
  std::printf("check: %s\n", tvmgen_app::CheckSettings(bad).c_str());
  tvmgen_app::Server server([](const std::string& line) { std::fprintf(stderr, "log: %s\n", line.c_str()); });
  tvmgen_app::ServerSettings s;
  s.address = "127.0.0.1";
  s.port = std::stoi(argv[2]);
  s.key = "iphone";
  s.work_dir = argv[3];
  std::string error;
  if (!server.Start(s, {"softmax"}, &error)) {
    std::fprintf(stderr, "start failed: %s\n", error.c_str());
    return 4;
  }
  std::printf("serving\n");
  std::fflush(stdout);
  std::string line;
  std::getline(std::cin, line);
  server.Stop();
  std::printf("stopped %d\n", server.running() ? 0 : 1);
  return 0;
}
