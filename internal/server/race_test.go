//go:build race

package server

// raceSlowdown scales the time limits of timing tests under the race detector, which
// slows everything several times.
const raceSlowdown = 10
