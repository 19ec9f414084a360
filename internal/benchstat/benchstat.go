// Package benchstat holds the summary statistics the benchmark harnesses
// (benchcrawlee, benchfarm, benchscale) report their rounds by.
package benchstat

import "slices"

// Median of xs (the mean of the middle two for an even count); 0 for none.
// xs is not reordered.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
