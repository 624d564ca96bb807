package gateway

import (
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Route maps the keys of a bucket under a prefix to the FencedLease whose
// holder may write them.
type Route struct {
	// Bucket is the bucket name.
	Bucket string `json:"bucket"`
	// Prefix selects keys that start with it; empty selects the whole
	// bucket. The longest matching prefix wins.
	Prefix string `json:"prefix,omitempty"`
	// Namespace and FencedLease name the FencedLease. Only service accounts
	// of this namespace may read or write these keys.
	Namespace   string `json:"namespace"`
	FencedLease string `json:"fencedLease"`
}

// String names the route's FencedLease as namespace/name.
func (r Route) String() string { return r.Namespace + "/" + r.FencedLease }

// Config is the gateway's routing table, read from a YAML or JSON file:
//
//	routes:
//	- bucket: reports
//	  prefix: monthly/
//	  namespace: billing
//	  fencedLease: exporter
type Config struct {
	Routes []Route `json:"routes"`
}

// LoadConfig reads and validates a configuration file.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read gateway configuration: %w", err)
	}
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("gateway configuration %s: %w", path, err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("gateway configuration %s: %w", path, err)
	}
	return &c, nil
}

// Validate checks every route: names that Kubernetes accepts, and no two
// routes for the same bucket and prefix.
func (c *Config) Validate() error {
	if len(c.Routes) == 0 {
		return fmt.Errorf("no routes")
	}
	seen := map[string]bool{}
	for i, r := range c.Routes {
		if r.Bucket == "" || strings.Contains(r.Bucket, "/") {
			return fmt.Errorf("route %d: invalid bucket %q", i, r.Bucket)
		}
		if errs := validation.IsDNS1123Label(r.Namespace); len(errs) > 0 {
			return fmt.Errorf("route %d: invalid namespace %q: %s", i, r.Namespace, strings.Join(errs, "; "))
		}
		if errs := validation.IsDNS1123Subdomain(r.FencedLease); len(errs) > 0 {
			return fmt.Errorf("route %d: invalid fencedLease %q: %s", i, r.FencedLease, strings.Join(errs, "; "))
		}
		k := r.Bucket + "/" + r.Prefix
		if seen[k] {
			return fmt.Errorf("route %d: bucket %q prefix %q is routed twice", i, r.Bucket, r.Prefix)
		}
		seen[k] = true
	}
	return nil
}

// Route returns the route of a key: the longest prefix of the bucket's
// routes that the key starts with.
func (c *Config) Route(bucket, key string) (Route, bool) {
	var best Route
	found := false
	for _, r := range c.Routes {
		if r.Bucket == bucket && strings.HasPrefix(key, r.Prefix) && (!found || len(r.Prefix) > len(best.Prefix)) {
			best, found = r, true
		}
	}
	return best, found
}

// ListAllowed reports whether a caller of namespace may list the bucket
// under prefix: some route of that namespace covers the whole prefix.
func (c *Config) ListAllowed(bucket, prefix, namespace string) bool {
	r, ok := c.Route(bucket, prefix)
	if !ok || r.Namespace != namespace {
		return false
	}
	// A longer route of another namespace under prefix would be listed too.
	for _, o := range c.Routes {
		if o.Bucket == bucket && o.Namespace != namespace && strings.HasPrefix(o.Prefix, prefix) && len(o.Prefix) > len(r.Prefix) {
			return false
		}
	}
	return true
}
