"""Pulumi entry point (``runtime: python``): the same program ``inferstack plan`` runs under mocks."""

from stacks.program import main

main()
