#import <UIKit/UIKit.h>

/// The one screen: server mode, address, port and key; start/stop; run the linked model; the log.
@interface ViewController : UIViewController
@end
