package fence

import (
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// follower re-reads files in a directory on every inotify event in it (when
// inotify is available) and every poll interval, until it is closed. Watcher
// and ShardWatcher follow their files with one.
type follower struct {
	fsw  *fsnotify.Watcher // nil when polling only
	done chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

// start calls read on every change in dir and every poll, in a goroutine of
// its own, until close. notify false polls only.
func (f *follower) start(dir string, notify bool, poll time.Duration, read func()) {
	f.done = make(chan struct{})
	if notify {
		f.fsw = startNotify(dir)
	}
	f.wg.Add(1)
	go f.loop(poll, read)
}

// startNotify watches dir, or returns nil when inotify is unavailable.
func startNotify(dir string) *fsnotify.Watcher {
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil
	}
	if err := fsw.Add(dir); err != nil {
		_ = fsw.Close()
		return nil
	}
	return fsw
}

func (f *follower) loop(poll time.Duration, read func()) {
	defer f.wg.Done()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	var events <-chan fsnotify.Event
	var errs <-chan error
	if f.fsw != nil {
		events, errs = f.fsw.Events, f.fsw.Errors
	}
	for {
		select {
		case <-f.done:
			return
		case _, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			drain(events)
		case _, ok := <-errs:
			// An error such as a queue overflow means events were lost:
			// read again. Reading the errors also keeps inotify's reader
			// from blocking on them.
			if !ok {
				errs = nil
				continue
			}
		case <-tick.C:
		}
		read()
	}
}

// drain discards queued events: one read covers them all.
func drain(events <-chan fsnotify.Event) {
	for {
		select {
		case _, ok := <-events:
			if !ok {
				return
			}
		default:
			return
		}
	}
}

// close stops following: no read starts after it returns.
func (f *follower) close() error {
	var err error
	f.once.Do(func() {
		close(f.done)
		if f.fsw != nil {
			err = f.fsw.Close()
		}
		f.wg.Wait()
	})
	return err
}
