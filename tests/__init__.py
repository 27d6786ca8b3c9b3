"""The test suite, one package per part of boundctx; what several parts share is in
``tests._support`` (docs/map.md, "Outside the package")."""
