"""compgen.models"""
