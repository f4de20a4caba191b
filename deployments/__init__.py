"""Profiles and deployment helpers."""
