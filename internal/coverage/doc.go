// Package coverage tells whether the fencing webhook guards the protected
// ConfigMaps and Secrets of a namespace, from the ValidatingWebhookConfiguration
// actually installed: whether it exists, has the fencing webhook, intercepts
// every write to ConfigMaps and Secrets, fails closed, and selects the
// namespace (its namespaceSelector evaluated against the namespace's labels,
// as the API server does).
//
// A FencedLease in a namespace that is not covered must say so (design.md, "Enforcement"):
// protection that silently is not there is worse than none. The decision is
// the pure function Check; Checker feeds it from a cache of its own that
// holds that one configuration, by name, and the metadata of namespaces, and
// tells the FencedLease controller when an answer may have changed.
package coverage
