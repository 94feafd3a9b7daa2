"""compgen.evaluation"""
