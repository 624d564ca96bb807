// Command child is the workload that the holder tests run under fence run.
// It appends one line per event to $CHILD_LOG, each with the wall-clock time
// in Unix nanoseconds, its FENCE_TOKEN and its pid:
//
//	start <ns> <token> <pid>   first thing in main
//	beat  <ns> <token> <pid>   every $CHILD_BEAT (default 20ms; the tests use 50ms): its "work"
//	stop  <ns> <token> <pid>   on SIGTERM or SIGINT, then it exits
//	term  <ns> <token> <pid>   on SIGTERM or SIGINT with $CHILD_IGNORE_TERM set: it goes on
//	                           working until it is killed
//
// A single goroutine writes every line, each with one append write, so no
// beat ever follows the stop line: the stop line is the end of its work.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	f, err := os.OpenFile(os.Getenv("CHILD_LOG"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	token, pid := os.Getenv("FENCE_TOKEN"), strconv.Itoa(os.Getpid())
	write := func(kind string) {
		if _, err := f.WriteString(kind + " " + strconv.FormatInt(time.Now().UnixNano(), 10) + " " + token + " " + pid + "\n"); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
	}
	write("start")
	beat := 20 * time.Millisecond
	if d, err := time.ParseDuration(os.Getenv("CHILD_BEAT")); err == nil && d > 0 {
		beat = d
	}
	t := time.NewTicker(beat)
	for {
		select {
		case <-t.C:
			write("beat")
		case <-sig:
			if os.Getenv("CHILD_IGNORE_TERM") != "" {
				write("term")
				continue
			}
			write("stop")
			os.Exit(0)
		}
	}
}
