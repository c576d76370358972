//go:build !race

package conn

const raceBuild = false
