// Package scale measures one operator serving many FencedLeases against a
// real API server (build tag scale; make scale): the time until every one is
// held from a cold start, and a steady state in which no grant may change.
package scale
