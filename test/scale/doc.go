// Package scale measures one operator serving many FencedLeases against a
// real API server (build tag scale; make scale, make bench): the time until
// every one is held from a cold start, a steady state in which no grant may
// change, two restarts (caching slim pods, then whole pods) with their
// memory, and the Lease writes of as many client-go elections. The figures
// go to the log and, as JSON, to $SCALE_OUT.
package scale
