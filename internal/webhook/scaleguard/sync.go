package scaleguard

import (
	"slices"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
)

// Key is one guarded object: its pseudo-resource (Resource) and its name.
type Key struct{ Resource, Name string }

// Keys returns every object the guard's rules guard, in the order of the
// rules.
func Keys(rules []rbacv1.PolicyRule) []Key {
	var out []Key
	for _, r := range rules {
		if len(r.Resources) != 1 || !isGuardRule(r, r.Resources[0]) {
			continue
		}
		for _, n := range r.ResourceNames {
			out = append(out, Key{Resource: r.Resources[0], Name: n})
		}
	}
	return out
}

// Plan decides a resync of the guard. held are the keys the guard's rules
// hold, protected the keys of the objects that carry the protected-by label
// now. Every protected key is added. A held key that is not protected is
// removed only once it has been seen unprotected for grace: a write that
// the fencing webhook admitted (and guarded) may reach the store a moment
// later, and its object must not lose its guard in between. since records
// when each unprotected held key was first seen so; Plan returns it
// updated, for the next resync.
func Plan(held []Key, protected map[Key]bool, since map[Key]time.Time, now time.Time, grace time.Duration) (add, remove []Key, next map[Key]time.Time) {
	next = map[Key]time.Time{}
	for _, k := range held {
		if protected[k] {
			continue
		}
		first, ok := since[k]
		if !ok {
			first = now
		}
		if now.Sub(first) >= grace {
			remove = append(remove, k)
			continue
		}
		next[k] = first
	}
	for k := range protected {
		if !slices.Contains(held, k) {
			add = append(add, k)
		}
	}
	slices.SortFunc(add, compareKeys)
	return add, remove, next
}

// Apply returns rules with add guarded and remove no longer guarded, and
// whether anything changed. A rule left without names is dropped. rules is
// not modified.
func Apply(rules []rbacv1.PolicyRule, add, remove []Key) ([]rbacv1.PolicyRule, bool) {
	changed := false
	out := slices.Clone(rules)
	for _, k := range add {
		var c bool
		out, c = addKey(out, k)
		changed = changed || c
	}
	if len(remove) == 0 {
		return out, changed
	}
	kept := out[:0:0]
	for _, r := range out {
		if len(r.Resources) == 1 && isGuardRule(r, r.Resources[0]) {
			names := slices.DeleteFunc(slices.Clone(r.ResourceNames), func(n string) bool {
				return slices.Contains(remove, Key{Resource: r.Resources[0], Name: n})
			})
			if len(names) != len(r.ResourceNames) {
				changed = true
				r.ResourceNames = names
			}
			if len(names) == 0 {
				continue
			}
		}
		kept = append(kept, r)
	}
	return kept, changed
}

func compareKeys(a, b Key) int {
	if a.Resource != b.Resource {
		if a.Resource < b.Resource {
			return -1
		}
		return 1
	}
	switch {
	case a.Name < b.Name:
		return -1
	case a.Name > b.Name:
		return 1
	}
	return 0
}
