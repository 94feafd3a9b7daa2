"""compgen.schedulers"""
