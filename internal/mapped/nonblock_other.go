//go:build !unix

package mapped

const oNonblock = 0
