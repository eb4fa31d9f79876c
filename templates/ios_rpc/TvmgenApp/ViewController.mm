// The app's screen, built in code. Defaults come from Info.plist (what `tvmgen rpc-app` was given);
// the values last used are kept in NSUserDefaults.
#import "ViewController.h"

#import "TvmgenBridge.h"

static NSArray<NSString*>* const kModes = @[ @"standalone", @"proxy", @"tracker" ];

@interface ViewController () <UITextFieldDelegate>
@end

@implementation ViewController {
  TvmgenBridge* _bridge;
  UISegmentedControl* _mode;
  UITextField* _address;
  UITextField* _port;
  UITextField* _key;
  UIButton* _startStop;
  UIButton* _run;
  UITextView* _log;
}

- (id)setting:(NSString*)name {
  id saved = [[NSUserDefaults standardUserDefaults] objectForKey:name];
  return saved ?: [[NSBundle mainBundle] objectForInfoDictionaryKey:[@"TvmgenDefault" stringByAppendingString:name]];
}

- (UITextField*)fieldWithPlaceholder:(NSString*)placeholder text:(NSString*)text {
  UITextField* f = [[UITextField alloc] init];
  f.placeholder = placeholder;
  f.text = text;
  f.borderStyle = UITextBorderStyleRoundedRect;
  f.autocapitalizationType = UITextAutocapitalizationTypeNone;
  f.autocorrectionType = UITextAutocorrectionTypeNo;
  f.delegate = self;
  return f;
}

- (UIButton*)buttonWithTitle:(NSString*)title action:(SEL)action {
  UIButton* b = [UIButton buttonWithType:UIButtonTypeSystem];
  [b setTitle:title forState:UIControlStateNormal];
  [b addTarget:self action:action forControlEvents:UIControlEventTouchUpInside];
  return b;
}

- (void)viewDidLoad {
  [super viewDidLoad];
  self.view.backgroundColor = UIColor.systemBackgroundColor;
  _bridge = [[TvmgenBridge alloc] init];
  __weak ViewController* weakSelf = self;
  _bridge.onLog = ^(NSString* line) {
    [weakSelf appendLog:line];
  };

  UILabel* title = [[UILabel alloc] init];
  title.text = [NSString stringWithFormat:@"tvmgen · %@", _bridge.modelName];
  title.font = [UIFont boldSystemFontOfSize:20];
  _mode = [[UISegmentedControl alloc] initWithItems:kModes];
  NSUInteger mode = [kModes indexOfObject:[self setting:@"Mode"]];
  _mode.selectedSegmentIndex = mode == NSNotFound ? 0 : (NSInteger)mode;
  _address = [self fieldWithPlaceholder:@"address (listen on / proxy / tracker)" text:[self setting:@"Address"]];
  _port = [self fieldWithPlaceholder:@"port" text:[[self setting:@"Port"] description]];
  _port.keyboardType = UIKeyboardTypeNumberPad;
  _key = [self fieldWithPlaceholder:@"key" text:[self setting:@"Key"]];
  _startStop = [self buttonWithTitle:@"Start server" action:@selector(toggleServer)];
  _run = [self buttonWithTitle:@"Run the model here" action:@selector(runModel)];
  _log = [[UITextView alloc] init];
  _log.editable = NO;
  _log.font = [UIFont monospacedSystemFontOfSize:11 weight:UIFontWeightRegular];

  UIStackView* stack = [[UIStackView alloc] initWithArrangedSubviews:@[ title, _mode, _address, _port, _key, _startStop,
                                                                        _run, _log ]];
  stack.axis = UILayoutConstraintAxisVertical;
  stack.spacing = 8;
  stack.translatesAutoresizingMaskIntoConstraints = NO;
  [self.view addSubview:stack];
  UILayoutGuide* g = self.view.safeAreaLayoutGuide;
  [NSLayoutConstraint activateConstraints:@[
    [stack.leadingAnchor constraintEqualToAnchor:g.leadingAnchor constant:16],
    [stack.trailingAnchor constraintEqualToAnchor:g.trailingAnchor constant:-16],
    [stack.topAnchor constraintEqualToAnchor:g.topAnchor constant:8],
    [stack.bottomAnchor constraintEqualToAnchor:g.bottomAnchor constant:-8],
  ]];
  [self appendLog:@"This app serves the model linked into it (iOS cannot load uploaded code): clients call "
                  @"remote.system_lib() instead of uploading a library."];
  if ([[[NSBundle mainBundle] objectForInfoDictionaryKey:@"TvmgenKind"] isEqualToString:@"deploy"]) {
    [self runModel];
  }
}

- (BOOL)textFieldShouldReturn:(UITextField*)field {
  [field resignFirstResponder];
  return YES;
}

- (void)appendLog:(NSString*)line {
  _log.text = [_log.text stringByAppendingFormat:@"%@\n", line];
  [_log scrollRangeToVisible:NSMakeRange(_log.text.length, 0)];
}

- (void)toggleServer {
  if (_bridge.running) {
    _startStop.enabled = NO;
    dispatch_async(dispatch_get_global_queue(QOS_CLASS_USER_INITIATED, 0), ^{
      [self->_bridge stop];
      dispatch_async(dispatch_get_main_queue(), ^{
        self->_startStop.enabled = YES;
        [self->_startStop setTitle:@"Start server" forState:UIControlStateNormal];
      });
    });
    return;
  }
  NSString* mode = kModes[(NSUInteger)_mode.selectedSegmentIndex];
  NSUserDefaults* d = [NSUserDefaults standardUserDefaults];
  [d setObject:mode forKey:@"Mode"];
  [d setObject:_address.text forKey:@"Address"];
  [d setObject:@(_port.text.integerValue) forKey:@"Port"];
  [d setObject:_key.text forKey:@"Key"];
  NSString* error = [_bridge startWithMode:mode address:_address.text port:_port.text.integerValue key:_key.text];
  if (error) {
    [self appendLog:[@"cannot start: " stringByAppendingString:error]];
    return;
  }
  [_startStop setTitle:@"Stop server" forState:UIControlStateNormal];
}

- (void)runModel {
  _run.enabled = NO;
  [self appendLog:@"running the model..."];
  dispatch_async(dispatch_get_global_queue(QOS_CLASS_USER_INITIATED, 0), ^{
    NSString* result = [self->_bridge runModelWithIterations:10];
    NSLog(@"tvmgen results %@", result);  // headless QA reads this from the device log
    dispatch_async(dispatch_get_main_queue(), ^{
      [self appendLog:result];
      self->_run.enabled = YES;
    });
  });
}

@end
