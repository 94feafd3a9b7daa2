"""compgen.pipelines"""
