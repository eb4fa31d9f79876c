// Objective-C++ bridge: UI types in, the C++ core (and so jni/'s runtime and RPC server) underneath.
#import "TvmgenBridge.h"

#include <memory>
#include <string>

#include "app_core.h"
#include "tvmgen/runtime.h"

static std::string Std(NSString* s) { return s ? std::string(s.UTF8String) : std::string(); }

@implementation TvmgenBridge {
  std::unique_ptr<tvmgen_app::Server> _server;
}

- (instancetype)init {
  if ((self = [super init])) {
    __weak TvmgenBridge* weakSelf = self;
    _server = std::make_unique<tvmgen_app::Server>([weakSelf](const std::string& line) {
      NSString* text = [NSString stringWithUTF8String:line.c_str()];
      dispatch_async(dispatch_get_main_queue(), ^{
        TvmgenBridge* strongSelf = weakSelf;
        if (strongSelf.onLog) strongSelf.onLog(text);
      });
    });
  }
  return self;
}

- (NSString*)modelName {
  return [[NSBundle mainBundle] objectForInfoDictionaryKey:@"TvmgenModelName"] ?: @"model";
}

- (NSString*)modelDirectory {
  return [[[NSBundle mainBundle] resourcePath] stringByAppendingPathComponent:@"model"];
}

- (BOOL)running {
  return _server->running();
}

- (NSString*)startWithMode:(NSString*)mode address:(NSString*)address port:(NSInteger)port key:(NSString*)key {
  tvmgen_app::ServerSettings settings;
  settings.mode = Std(mode);
  settings.address = Std(address);
  settings.port = static_cast<int>(port);
  settings.key = Std(key);
  NSString* caches = NSSearchPathForDirectoriesInDomains(NSCachesDirectory, NSUserDomainMask, YES).firstObject;
  settings.work_dir = Std([caches stringByAppendingPathComponent:@"tvmgen-rpc"]);
  std::string error;
  if (!_server->Start(settings, {Std(self.modelName)}, &error)) {
    return [NSString stringWithUTF8String:error.c_str()];
  }
  return nil;
}

- (void)stop {
  _server->Stop();
}

- (NSString*)runModelWithIterations:(NSInteger)iterations {
  try {
    std::string json = tvmgen_app::RunLinkedModel(Std(self.modelDirectory), 2, static_cast<int>(iterations));
    return [NSString stringWithUTF8String:json.c_str()];
  } catch (const std::exception& e) {
    return [NSString stringWithFormat:@"{\"error\": \"%s\"}", e.what()];
  }
}

@end
