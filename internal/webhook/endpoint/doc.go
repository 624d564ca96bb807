// Package endpoint guards the operator's admission webhook server, which any
// pod of the cluster can reach over the network, so that only the API server
// can have a request decided.
//
// The API server does not authenticate itself to webhooks unless each of its
// instances is configured to (an admission configuration file with a client
// certificate, which managed control planes do not offer). So the webhooks
// are served under a per-install secret path instead: the manager keeps a
// random token in a Secret of its own namespace (created by the first replica
// that finds none; every replica reads the same one), serves each webhook only
// under <path>/<token>, and writes that path into the clientConfig of the
// webhook configurations that call it (clientConfig.service.path, or the path
// of clientConfig.url). Anything else gets 404 before its body is read:
// a forged AdmissionReview is never decoded, counted or recorded. The token
// travels only inside TLS, is compared in constant time, and never appears in
// logs or metric labels (the handlers are registered, and instrumented, under
// the bare path).
//
// Requests on the right path have their body capped before it is read. The
// configurations are watched by name, and a path that an install tool resets
// is written again.
package endpoint
