package fencetest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/fencedlease/fencedlease/pkg/fence"
)

const (
	dataLink    = "..data"
	dataTmpLink = "..data_tmp"
	// tsFormat is the prefix of the kubelet's timestamped directories; a
	// random suffix makes each name unique.
	tsFormat = "..2006_01_02_15_04_05."
)

// KubeletWriter writes files into a directory exactly like the kubelet's
// atomic writer updates a projected or downward-API volume:
//
//  1. the new files are written into a fresh timestamped directory
//     such as "..2026_11_29_21_00_00.123456789";
//  2. a symlink "..data_tmp" to that directory is created and renamed over
//     "..data", which swaps all files at once;
//  3. the user-visible names are symlinks "name -> ..data/name", created
//     on the first write only;
//  4. the previous timestamped directory is removed.
//
// It is safe for concurrent use.
type KubeletWriter struct {
	// OnSwap, when set, is called right after "..data" is swapped: the
	// moment the new files become visible. Benchmarks use it to time
	// detection from publication rather than from the start of the write.
	OnSwap func()

	dir string
	mu  sync.Mutex
}

// NewKubeletWriter returns a writer for dir, creating dir if needed.
func NewKubeletWriter(dir string) (*KubeletWriter, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create volume directory: %w", err)
	}
	return &KubeletWriter{dir: dir}, nil
}

// Dir returns the volume directory.
func (k *KubeletWriter) Dir() string { return k.dir }

// Holder publishes a holder token.
func (k *KubeletWriter) Holder(fenceValue int64, lease string) error {
	return k.WriteToken(string(fence.RoleHolder), strconv.FormatInt(fenceValue, 10), lease)
}

// Standby publishes a standby token (empty fence), as the operator does.
func (k *KubeletWriter) Standby(lease string) error {
	return k.WriteToken(string(fence.RoleStandby), "", lease)
}

// WriteToken publishes the three token files with raw contents, which may
// be malformed on purpose.
func (k *KubeletWriter) WriteToken(role, fenceValue, lease string) error {
	return k.Write(map[string]string{fence.RoleFile: role, fence.FenceFile: fenceValue, fence.LeaseFile: lease})
}

// Write publishes files (name to content) as one atomic update. Names are
// plain file names.
func (k *KubeletWriter) Write(files map[string]string) error {
	k.mu.Lock()
	defer k.mu.Unlock()

	oldTs, err := os.Readlink(filepath.Join(k.dir, dataLink))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read %s: %w", dataLink, err)
	}
	tsDir, err := os.MkdirTemp(k.dir, time.Now().UTC().Format(tsFormat))
	if err != nil {
		return fmt.Errorf("create timestamped directory: %w", err)
	}
	if err := os.Chmod(tsDir, 0o755); err != nil {
		return fmt.Errorf("chmod %s: %w", tsDir, err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(tsDir, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	tmp := filepath.Join(k.dir, dataTmpLink)
	if err := os.Symlink(filepath.Base(tsDir), tmp); err != nil {
		return fmt.Errorf("create %s: %w", dataTmpLink, err)
	}
	if err := os.Rename(tmp, filepath.Join(k.dir, dataLink)); err != nil {
		return fmt.Errorf("swap %s: %w", dataLink, err)
	}
	if k.OnSwap != nil {
		k.OnSwap()
	}
	for name := range files {
		visible := filepath.Join(k.dir, name)
		if _, err := os.Lstat(visible); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join(dataLink, name), visible); err != nil {
			return fmt.Errorf("create %s: %w", name, err)
		}
	}
	if oldTs != "" {
		if err := os.RemoveAll(filepath.Join(k.dir, oldTs)); err != nil {
			return fmt.Errorf("remove %s: %w", oldTs, err)
		}
	}
	return nil
}
