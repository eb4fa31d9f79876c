// Objective-C face of the app's C++ core (Bridge/app_core.h) for the UI.
#import <Foundation/Foundation.h>

NS_ASSUME_NONNULL_BEGIN

@interface TvmgenBridge : NSObject
/// Called on the main queue with each server log line.
@property(copy, nonatomic, nullable) void (^onLog)(NSString* line);
@property(readonly, nonatomic) BOOL running;
/// The model linked into this app: its name and the folder holding its manifest in the bundle.
@property(readonly, nonatomic) NSString* modelName;
@property(readonly, nonatomic) NSString* modelDirectory;

/// mode: standalone | proxy | tracker. Returns nil on success, else what is wrong.
- (nullable NSString*)startWithMode:(NSString*)mode address:(NSString*)address port:(NSInteger)port key:(NSString*)key;
- (void)stop;
/// Runs the linked model (warm-up + iterations) and returns its results as JSON, or the error.
- (NSString*)runModelWithIterations:(NSInteger)iterations;
@end

NS_ASSUME_NONNULL_END
