// Package pace decides how often one operator renews the grants it holds,
// so that renewals leave room for everything else and never run late.
//
// Renewals go first (a grant that expires because the operator was busy
// changes the fence under a healthy holder). Left at that, an operator with
// more grants than it can renew every renew interval fails in one of two
// ways: FencedLeases that never get a first grant, because renewals take
// every worker, or renewals that run later and later until grants expire.
// Pace measures the share of the workers' time that renewals take and
// stretches the renew interval of every grant towards its lease duration
// while that share is above its target (half), and relaxes it back to the
// spec's interval as the share falls; a renewal that ran a quarter into its
// slack stretches them fully at once. When even the longest interval leaves
// renewals most of the workers, or renewals run late, it reports the
// operator saturated.
//
// First grants are admitted with a margin (admit.go): they wait from well
// before saturation (renewals at their longest interval above Headroom of
// the workers' time, or a recent renewal a quarter into its slack), for a
// while after a held grant expired unrenewed, and they go through a budget
// whose rate halves each time admission closes and grows back slowly while
// it is open. Takeovers and re-grants are never held back, but they spend
// from the same budget. An operator with more FencedLeases than it can
// renew thus stops growing short of its limit, instead of oscillating
// around it, where a slow moment of the API server expires grants.
//
// It holds no client and reads no clock: the controller reports what its
// reconciles took, on its own clock, and asks for intervals.
package pace
