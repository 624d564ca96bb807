// Command manager is the fencedlease operator: the FencedLease controller and,
// on its webhook port, the admission webhooks.
package main
