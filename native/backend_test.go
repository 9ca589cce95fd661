package native

// The CPU backend implements every Backend method.
var _ Backend = (*CPU)(nil)
