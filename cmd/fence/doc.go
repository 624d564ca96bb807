// Command fence runs a workload command only while its pod holds a
// FencedLease, and prints the pod's fencing token.
//
//	fence run [--dir D] [--grace-period 10s] [--poll-interval 5s] -- CMD [ARG...]
//	fence token [--dir D]
//	fence version
//	fence help
//
// fence run waits until the token files say this pod is the holder, starts
// CMD with FENCE_TOKEN and FENCE_LEASE in its environment, and stops it
// (SIGTERM to its process group, SIGKILL after the grace period) as soon as
// the files say holdership is lost or the fence changed. It then waits to be
// the holder again and starts a new CMD with the new token. When CMD exits on
// its own, fence run exits with CMD's status (128+N when killed by signal N).
// SIGTERM and SIGINT are forwarded to CMD; when no CMD runs they make fence
// run exit 0.
//
// fence token prints the fence and exits 0 on the holder, exits 1 on a
// standby, and exits 2 when the token files are absent or malformed.
//
// The token directory defaults to /etc/fencedlease; the FENCE_DIR
// environment variable changes the default and --dir overrides both.
//
// Exit statuses of fence itself: 2 for usage errors and for fence token's
// unreadable files; for fence run, 125 when fence fails (for example the
// token files are absent), 126 when CMD cannot be executed and 127 when it is
// not found, as env(1) does.
package main
