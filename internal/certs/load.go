package certs

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
)

// load writes the Secret's key pair into the certificate directory when it is
// valid and differs from what is there, and opens the gate of the webhook
// server once a pair is in place. An invalid or empty pair (a Secret not
// filled yet, or being rewritten) keeps the current files.
func (c *Certs) load(log logr.Logger, s *corev1.Secret) {
	c.mu.Lock()
	defer c.mu.Unlock()
	crt, key := s.Data[CertName], s.Data[KeyName]
	if len(crt) == 0 || len(key) == 0 {
		log.Info("The Secret holds no serving certificate yet")
		return
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		log.Error(err, "The Secret holds no valid key pair; keeping the current serving certificate")
		return
	}
	changed, err := writePair(c.opts.CertDir, crt, key)
	if err != nil {
		log.Error(err, "Cannot write the serving certificate", "dir", c.opts.CertDir)
		return
	}
	if changed {
		log.Info("Loaded the serving certificate", "notAfter", pair.Leaf.NotAfter, "dir", c.opts.CertDir)
	}
	c.loadedOnce.Do(func() { close(c.loaded) })
}

// writePair writes tls.key, then tls.crt, each by a rename, so that a reader
// never sees a partly written file. It reports whether anything changed.
func writePair(dir string, crt, key []byte) (bool, error) {
	oldCrt, errCrt := os.ReadFile(filepath.Join(dir, CertName))
	oldKey, errKey := os.ReadFile(filepath.Join(dir, KeyName))
	if errCrt == nil && errKey == nil && bytes.Equal(oldCrt, crt) && bytes.Equal(oldKey, key) {
		return false, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("create certificate directory %s: %w", dir, err)
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{KeyName, key}, {CertName, crt}} {
		if err := writeFile(filepath.Join(dir, f.name), f.data); err != nil {
			return false, err
		}
	}
	return true, nil
}

func writeFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
