# The C++ core's declarations, one .pxd per group of csrc/ headers; each says which it declares.
