// The app's entry point: UIKit with AppDelegate, no storyboards.
#import <UIKit/UIKit.h>

#import "AppDelegate.h"

int main(int argc, char* argv[]) {
  @autoreleasepool {
    return UIApplicationMain(argc, argv, nil, NSStringFromClass([AppDelegate class]));
  }
}
