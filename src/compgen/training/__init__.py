"""compgen.training"""
