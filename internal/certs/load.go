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

// dataLink is the symbolic link to the directory with the current pair, as
// the kubelet lays out a Secret volume: tls.crt and tls.key link through it,
// so that both change in one rename and a reader never sees a certificate
// with the other one's key.
const dataLink = "..data"

// writePair puts the pair into dir, reporting whether anything changed.
func writePair(dir string, crt, key []byte) (bool, error) {
	oldCrt, errCrt := os.ReadFile(filepath.Join(dir, CertName))
	oldKey, errKey := os.ReadFile(filepath.Join(dir, KeyName))
	if errCrt == nil && errKey == nil && bytes.Equal(oldCrt, crt) && bytes.Equal(oldKey, key) {
		return false, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("create certificate directory %s: %w", dir, err)
	}
	data, err := os.MkdirTemp(dir, "..pair-")
	if err != nil {
		return false, fmt.Errorf("write certificate into %s: %w", dir, err)
	}
	for name, b := range map[string][]byte{CertName: crt, KeyName: key} {
		if err := os.WriteFile(filepath.Join(data, name), b, 0o600); err != nil {
			_ = os.RemoveAll(data)
			return false, fmt.Errorf("write %s into %s: %w", name, data, err)
		}
	}
	old, _ := os.Readlink(filepath.Join(dir, dataLink))
	tmpLink := filepath.Join(dir, dataLink+".tmp")
	_ = os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(data), tmpLink); err != nil {
		return false, fmt.Errorf("link %s: %w", tmpLink, err)
	}
	if err := os.Rename(tmpLink, filepath.Join(dir, dataLink)); err != nil {
		return false, fmt.Errorf("switch %s to the new pair: %w", dataLink, err)
	}
	for _, name := range []string{CertName, KeyName} {
		link := filepath.Join(dir, name)
		if target, err := os.Readlink(link); err == nil && target == filepath.Join(dataLink, name) {
			continue
		}
		_ = os.Remove(link)
		if err := os.Symlink(filepath.Join(dataLink, name), link); err != nil {
			return false, fmt.Errorf("link %s: %w", link, err)
		}
	}
	if old != "" && old != filepath.Base(data) {
		_ = os.RemoveAll(filepath.Join(dir, old))
	}
	return true, nil
}
