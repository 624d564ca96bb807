package holder_test

import "sync/atomic"

type atomicBool = atomic.Bool
