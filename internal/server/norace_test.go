//go:build !race

package server

// raceSlowdown scales the time bounds of tests: 1 without the race detector.
const raceSlowdown = 1
