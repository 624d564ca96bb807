package fence

import "errors"

// Errors returned by Read and the Watcher. Test them with errors.Is.
var (
	// ErrAbsent means the token directory or one of its files does not
	// exist: the pod was not injected by the operator.
	ErrAbsent = errors.New(`token files absent: label the pod ` + InjectLabel + `: "true" so that the operator mounts them`)
	// ErrMalformed means a token file exists but its content is invalid.
	ErrMalformed = errors.New("malformed token file")
	// ErrUnstable means the files kept changing while they were read.
	// It is transient: read again.
	ErrUnstable = errors.New("token files kept changing during the read")
	// ErrNotHolder is returned when a holder token is required and the
	// token is not one.
	ErrNotHolder = errors.New("not the holder")
	// ErrLost is the cause of a holder context that was cancelled because
	// holdership ended or the fence changed.
	ErrLost = errors.New("holdership lost")
	// ErrClosed is returned once the Watcher is closed.
	ErrClosed = errors.New("watcher closed")
)
