// Package install tests the two ways the operator is installed, the Helm
// chart (charts/fencedlease) and kustomize (config/default), and the image
// the Dockerfile builds, against a real kube-apiserver and etcd:
//
//   - the chart lints and renders with default and other values, and its
//     values schema rejects bad values with a clear message;
//   - the chart and config/default install the same objects, and the chart's
//     copies of config/ (CRDs, RBAC rules, webhook configurations) are exact;
//   - both are accepted by the API server (server-side dry-run), and helm
//     install, upgrade and uninstall do what they claim;
//   - the binaries the Dockerfile builds are static, and the manager among
//     them, run with the chart's own ServiceAccount token and the chart's
//     Deployment flags, provisions its certificate, injects its CA, becomes
//     Ready, grants and hands over a lease, fences a stale write, survives a
//     certificate rotation, and is denied what least privilege denies it.
//
// No kubelet runs: the Deployment's pods never start, so the manager runs as
// a local process, and the API server calls its webhooks by URL, with the CA
// the manager injected itself.
package install
