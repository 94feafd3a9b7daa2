"""compgen.data"""
