package scaleguard

// Allowed exposes Guard.allowed to the tests on a real API server, which
// live in package scaleguard_test (testenv imports the operator's setup,
// which imports this package).
var Allowed = Guard.allowed
