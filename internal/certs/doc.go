// Package certs gives the webhook server its serving certificate from a
// Secret in the operator's namespace, and says when the operator may be Ready.
//
// The Secret is filled either by the operator itself, which provisions a CA
// and a serving certificate, rotates them before they expire and injects the
// CA into the webhook configurations (github.com/open-policy-agent/cert-controller
// does that work: rotation is not written here), or by an external issuer
// such as cert-manager together with its CA injector.
//
// Every replica loads the certificate from the Secret through a watch and
// writes it into the webhook server's certificate directory, where
// controller-runtime's certificate watcher picks up every change. Loading it
// through the API rather than from a Secret volume means a replica serves a
// new certificate as soon as it is written, instead of after the kubelet's
// next sync of the volume, and an install is ready seconds after it starts.
//
// A replica is Ready only when the certificate its webhook server presents
// is valid for the webhook Service and is trusted by the CA bundle of every
// webhook configuration the API server uses to call it: that is the
// condition under which admission through it works.
package certs
