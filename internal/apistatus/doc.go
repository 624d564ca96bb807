// Package apistatus reads the API server's answers to a write: which
// precondition it failed. Pure: it looks at the error only.
package apistatus
