package gateway

import (
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/fencedlease/fencedlease/internal/record"
)

// Route maps the keys of a bucket under a prefix to the FencedLease whose
// holder may write them, or to a FencedShardSet: then the first path
// segment after the prefix is the shard key ("<prefix><key>/<rest>"), and
// only that shard's owner may write under it.
type Route struct {
	// Bucket is the bucket name.
	Bucket string `json:"bucket"`
	// Prefix selects keys that start with it; empty selects the whole
	// bucket. The longest matching prefix wins.
	Prefix string `json:"prefix,omitempty"`
	// Namespace and FencedLease name the FencedLease. Only service accounts
	// of this namespace may read or write these keys.
	Namespace   string `json:"namespace"`
	FencedLease string `json:"fencedLease,omitempty"`
	// FencedShardSet names a FencedShardSet of Namespace instead of a
	// FencedLease; exactly one of the two is set.
	FencedShardSet string `json:"fencedShardSet,omitempty"`
	// Shard is the shard key of one write of a FencedShardSet route, from
	// its path (ShardRoute); never configured.
	Shard string `json:"-"`
}

// String names the route's FencedLease or FencedShardSet as
// namespace/name.
func (r Route) String() string {
	if r.FencedShardSet != "" {
		return r.Namespace + "/" + r.FencedShardSet
	}
	return r.Namespace + "/" + r.FencedLease
}

// Lock names what grants the writes of the route, for messages:
// "FencedLease ns/name", or "shard \"key\" of FencedShardSet ns/set".
func (r Route) Lock() string {
	if r.FencedShardSet == "" {
		return "FencedLease " + r.String()
	}
	if r.Shard == "" {
		return "FencedShardSet " + r.String()
	}
	return fmt.Sprintf("shard %q of FencedShardSet %s", r.Shard, r.String())
}

// LeaseName is the name of the Lease that records the route's grant: the
// FencedLease's, or the shard's ("<set>-<key>").
func (r Route) LeaseName() string {
	if r.FencedShardSet != "" {
		return record.ShardLeaseName(r.FencedShardSet, r.Shard)
	}
	return r.FencedLease
}

// ShardRoute returns the route of one write under a FencedShardSet route:
// the shard key is the first segment of key after the route's prefix, and
// something must follow it ("<prefix><shard>/<rest>"). key is a path that
// ParsePath accepted (no ".", "..", or empty segment). Whether the set has
// that shard is decided on the set itself (ShardGrants). A FencedLease
// route is returned as it is.
func ShardRoute(r Route, key string) (Route, error) {
	if r.FencedShardSet == "" {
		return r, nil
	}
	rest, ok := strings.CutPrefix(key, r.Prefix)
	if !ok {
		return Route{}, fmt.Errorf("%s is not under the prefix %q of FencedShardSet %s", key, r.Prefix, r)
	}
	shard, tail, ok := strings.Cut(rest, "/")
	switch {
	case shard == "":
		return Route{}, fmt.Errorf("%s names no shard of FencedShardSet %s: the key must be %s<shard>/<name>", key, r, r.Prefix)
	case !ok || tail == "":
		return Route{}, fmt.Errorf("%s names shard %q of FencedShardSet %s but no object in it: the key must be %s<shard>/<name>", key, shard, r, r.Prefix)
	case shard == "." || shard == "..":
		return Route{}, fmt.Errorf("%s: %q is not a shard of FencedShardSet %s", key, shard, r)
	}
	r.Shard = shard
	return r, nil
}

// Config is the gateway's routing table, read from a YAML or JSON file:
//
//	routes:
//	- bucket: reports
//	  prefix: monthly/
//	  namespace: billing
//	  fencedLease: exporter
//	- bucket: reports
//	  prefix: regions/
//	  namespace: billing
//	  fencedShardSet: exporters    # regions/<shard>/...
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

// Validate checks every route: names that Kubernetes accepts, no two
// routes for the same bucket and prefix, a shard route's prefix empty or
// ending in "/", and no route under a shard route's prefix.
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
		if err := r.validateLock(); err != nil {
			return fmt.Errorf("route %d (bucket %q prefix %q): %w", i, r.Bucket, r.Prefix, err)
		}
		if r.FencedShardSet != "" && r.Prefix != "" && !strings.HasSuffix(r.Prefix, "/") {
			return fmt.Errorf("route %d (bucket %q prefix %q): the prefix of a shard route must be empty or end in \"/\": the shard is the path segment after it", i, r.Bucket, r.Prefix)
		}
		k := r.Bucket + "/" + r.Prefix
		if seen[k] {
			return fmt.Errorf("route %d: bucket %q prefix %q is routed twice", i, r.Bucket, r.Prefix)
		}
		seen[k] = true
	}
	for i, r := range c.Routes {
		for j, o := range c.Routes {
			if i != j && r.FencedShardSet != "" && o.Bucket == r.Bucket && len(o.Prefix) > len(r.Prefix) && strings.HasPrefix(o.Prefix, r.Prefix) {
				return fmt.Errorf("route %d (bucket %q prefix %q) lies under shard route %d (prefix %q): it would take keys of the shards of FencedShardSet %s/%s from their owners",
					j, o.Bucket, o.Prefix, i, r.Prefix, r.Namespace, r.FencedShardSet)
			}
		}
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

// validateLock checks that the route names exactly one FencedLease or
// FencedShardSet, by a valid name.
func (r Route) validateLock() error {
	switch {
	case r.FencedLease != "" && r.FencedShardSet != "":
		return fmt.Errorf("both fencedLease %q and fencedShardSet %q are set: name exactly one", r.FencedLease, r.FencedShardSet)
	case r.FencedShardSet != "":
		if errs := validation.IsDNS1123Subdomain(r.FencedShardSet); len(errs) > 0 {
			return fmt.Errorf("invalid fencedShardSet %q: %s", r.FencedShardSet, strings.Join(errs, "; "))
		}
		if r.Shard != "" {
			return fmt.Errorf("shard %q is set: the shard comes from each key, never from the configuration", r.Shard)
		}
		return nil
	case r.FencedLease == "":
		return fmt.Errorf("neither fencedLease nor fencedShardSet is set: name exactly one")
	}
	if errs := validation.IsDNS1123Subdomain(r.FencedLease); len(errs) > 0 {
		return fmt.Errorf("invalid fencedLease %q: %s", r.FencedLease, strings.Join(errs, "; "))
	}
	return nil
}
