// Package writelog reads what the example fenced controller
// (examples/fenced-controller) logs about each of its writes, one JSON line
// with the message "Write", and counts them the same way for the tests of
// test/controllers and for make demo-controller: by outcome, and, for a
// replica paused and resumed, by when and why it wrote.
package writelog
